"""GPU probe: NVML sampling (`nvml`) and its Prometheus exposition (`exporter`), run by `rca gpu-probe`.

It exists because no standard exporter publishes NVML's GPM metrics (SM, tensor and DRAM bandwidth
utilisation on Hopper and newer), which the compute-to-memory signal needs where DCGM profiling is off.
"""
