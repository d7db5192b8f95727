"""Staleness rules: Dressage's controls and other systems' policies as one spec grammar, and admission rules."""
