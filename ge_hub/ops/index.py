"""Placeholder: filled by the op-set work."""
