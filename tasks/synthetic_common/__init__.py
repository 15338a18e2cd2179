"""Helpers shared by the synthetic benchmarks (MAD, MQAR, RegBench): on-disk cache of generated
data, accuracy definitions, the small backbones and the figure plots."""
