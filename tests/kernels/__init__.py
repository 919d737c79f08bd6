"""Tests of the built-in kernel families (a package: its module names repeat tests/ops/)."""
