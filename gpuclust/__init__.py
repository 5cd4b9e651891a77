"""gpuclust: a Slurm-native toolkit for the people who run GPU clusters."""

__version__ = "0.1.0"
