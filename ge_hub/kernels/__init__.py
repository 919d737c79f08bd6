"""Kernels: the executable side of ops, registered through `register_kernels`.

`base` defines what a kernel registration carries (a C symbol with its Python-side
attribute packer, or a Python callable); the other modules register ge-hub's built-in
CPU kernels, family by family.
"""
