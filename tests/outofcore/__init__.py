"""Tests of ``outofcore`` on the CPU: engines, chunk files, jobs, resume, integrity, the CLI."""
