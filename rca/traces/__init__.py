"""Traces: a bounded sample of Jaeger or Tempo spans over the investigation window, turned into
latency attribution (which operation's own time grew since the onset) and findings."""
