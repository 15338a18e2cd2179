"""MAD (mad-lab's six synthetic tasks), Table 1 and the ablation of the paper."""
