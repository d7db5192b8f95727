"""AReaL's rollout dumps (`rollout/{tail_version}/{task_id}.jsonl`)."""
