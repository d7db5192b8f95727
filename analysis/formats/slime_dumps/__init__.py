"""slime's rollout dumps (`rollout_data/<id>.pt`) and train dumps (`train_data/<id>.pt`)."""
