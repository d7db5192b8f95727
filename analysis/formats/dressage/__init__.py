"""Dressage's own files: artifact folders (`traj_payload/`, `traj_err/`) and whole run folders."""
