"""The files people read, written from the journal's records: `events.jsonl`,
`token_usage.jsonl`, `status.json` and the run's terminal (see README.md here)."""
