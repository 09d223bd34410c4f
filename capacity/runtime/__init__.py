"""Running work: time budgets per request and work spread over threads."""
