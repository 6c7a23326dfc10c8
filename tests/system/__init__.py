"""Whole-system tests: docker-compose.yml, its command lines run as real processes, benchmarks."""
