"""rewardprof: reward profiling for RL training blends. The package map is docs/architecture.md."""
