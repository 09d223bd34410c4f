"""Running work: time budgets per request, work spread over threads, heavy jobs on a shared pool of worker
processes, memory handed back, and warnings kept from the user."""
