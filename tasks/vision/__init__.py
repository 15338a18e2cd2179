"""Image classification (paper Table 3): timm DeiT-Tiny with encoder ZeroS. See docs/vision.md."""
