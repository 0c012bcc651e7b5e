"""Money: what a token costs (pricing) and what a team may spend in a period (budgets).
What a request's attempts were billed is counted where they run
(:mod:`gateway.recovery.billing`)."""
