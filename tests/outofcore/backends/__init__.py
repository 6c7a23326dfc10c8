"""Tests of ``outofcore.backends`` that every backend runs: the engine conformance suite."""
