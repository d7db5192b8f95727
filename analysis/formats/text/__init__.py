"""JSON and JSONL text shared by the formats: parsing with line-accurate errors, large lines read lean, one file on two cores."""
