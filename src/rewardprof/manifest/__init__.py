"""The run manifest as a whole: read and checked against the config model (core/config.py)
and each entry's environment and options (environments/), the per-stage config files of a run
directory, and the config reference rendered from those models. It sits above environments and
sources, which the config model itself never imports."""
