"""NeMo-RL's training dumps (`train_data_step{N}.jsonl`)."""
