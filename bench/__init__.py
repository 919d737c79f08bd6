"""Benchmarks of ge-hub beside ONNX Runtime, OpenVINO and PyTorch, measured in one run.

Every figure ge-hub claims comes from here, never from a timed unit test. Timings on a
shared machine are noisy: engines are timed interleaved and medians are reported.
"""
