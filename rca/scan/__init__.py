"""The fleet scan: every serving instance's early signals, a few PromQL queries for the whole fleet,
forecast against their thresholds and the TTFT SLO, and an early-warning incident when an instance
degrades, before the SLA alert fires.

- `queries`: the profile's signal queries made fleet-wide (`by (instance)`), one query per signal;
- `fleet`: discovery of the serving targets and their hosts, and the scan's range queries;
- `window`: the history kept between scans (this hour, the same hour yesterday), read in pieces;
- `slo_rules`: each instance's TTFT SLO, read from the operator's Prometheus alerting rules;
- `forecast`: current value, robust trend, time to cross, baseline, P(SLO breach) per instance;
- `states`: ok -> watch -> warning -> cleared, with hysteresis (pure);
- `warnings`: the states and transitions stored, and a warning turned into an incident;
- `scanner`: one scan, end to end.
"""
