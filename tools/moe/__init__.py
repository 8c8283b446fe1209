"""tune_moe: fused-MoE kernel config names, coverage, log reading, tuning and verification."""
