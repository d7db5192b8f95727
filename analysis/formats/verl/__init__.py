"""verl's rollout dumps (`{rollout_data_dir}/{step}.jsonl`)."""
