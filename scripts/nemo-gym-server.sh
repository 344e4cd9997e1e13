#!/usr/bin/env bash
# Start or stop one NeMo Gym resource server for the `nemo_gym` environment (docs/environments.md):
#   scripts/nemo-gym-server.sh start MODULE PORT   # e.g. resources_servers.example_multi_step.app
#   scripts/nemo-gym-server.sh stop PORT
# `start` returns once the server accepts connections on 127.0.0.1:PORT (at most 120 s), its
# process in the background (pid in .nemo-gym-PORT.pid, log in logs/nemo-gym-PORT.log).
# The interpreter: $NEMO_GYM_PYTHON, else .venv-nemo-gym/bin/python (make install-nemo-gym).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${NEMO_GYM_PYTHON:-.venv-nemo-gym/bin/python}"
case "${1:-}" in
  start)
    module="$2" port="$3"
    [[ -x "$python" ]] || { echo "nemo-gym-server: no $python (make install-nemo-gym)" >&2; exit 1; }
    mkdir -p logs
    nohup "$python" "$here/nemo_gym_server.py" "$module" "$port" >"logs/nemo-gym-$port.log" 2>&1 &
    echo $! >".nemo-gym-$port.pid"
    for _ in $(seq 1 600); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "nemo-gym-server: $module on http://127.0.0.1:$port"
        exit 0
      fi
      if ! kill -0 "$(cat ".nemo-gym-$port.pid")" 2>/dev/null; then
        tail -20 "logs/nemo-gym-$port.log" >&2
        exit 1
      fi
      sleep 0.2
    done
    echo "nemo-gym-server: $module did not listen on port $port within 120 s" >&2
    exit 1
    ;;
  stop)
    port="$2"
    kill "$(cat ".nemo-gym-$port.pid")" && rm -f ".nemo-gym-$port.pid"
    ;;
  *)
    echo "usage: $0 start MODULE PORT | stop PORT" >&2
    exit 2
    ;;
esac
