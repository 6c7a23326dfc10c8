"""The test suite; its folders mirror the packages (see tests/README.md)."""
