"""Agent-driven tuning loop: propose one lever change at a time, measure it, keep it only when it is better."""
