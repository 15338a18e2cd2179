"""Framework code shared by every task: training module, objectives, backbone, results, tables."""
