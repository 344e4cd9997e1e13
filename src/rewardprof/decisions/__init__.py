"""Decision mathematics: per-task statistics, the labels' priors and posteriors, the keep rules
and adaptive sampling's stopping tests and round plan. Pure functions of rewards and config; no
file I/O."""
