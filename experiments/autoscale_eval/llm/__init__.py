"""The LLM autoscaling evaluation (`manage.py autoscale_eval --trace servegen-m-large`): a group-per-replica model of an
LLM service fed by ServeGen's request rates and token sizes, tidal against HPA and an AIBrix-like KPA, scored by SLO
attainment and GPU-hours per million tokens."""
