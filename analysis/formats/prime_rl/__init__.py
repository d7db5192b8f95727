"""prime-rl's episode logs (`rollouts/step_N/train/all/traces.jsonl`)."""
