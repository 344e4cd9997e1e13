"""Serve one NeMo Gym resource server, for the `nemo_gym` environment (docs/environments.md).

Run with the NeMo Gym environment's interpreter (scripts/install-nemo-gym.sh; usually through
scripts/nemo-gym-server.sh), never imported by rewardprof:
`python nemo_gym_server.py resources_servers.example_session_state_mgmt.app PORT`. It builds the
module's resource server class with its config class, as NeMo Gym's `run_webserver` does, but
without NeMo Gym's head server and global configuration (one server alone needs neither), and
serves it with uvicorn on 127.0.0.1:PORT until killed.
"""

import importlib
import inspect
import sys

import uvicorn
from nemo_gym.base_resources_server import SimpleResourcesServer
from nemo_gym.config_types import BaseServerConfig
from nemo_gym.server_utils import ServerClient
from omegaconf import OmegaConf


def main() -> None:
    module_name, port = sys.argv[1], int(sys.argv[2])
    module = importlib.import_module(module_name)
    cls = next(
        c
        for _, c in inspect.getmembers(module, inspect.isclass)
        if issubclass(c, SimpleResourcesServer) and c.__module__ == module.__name__
    )
    config_cls = cls.model_fields["config"].annotation
    config = config_cls(host="127.0.0.1", port=port, entrypoint="app.py", name="rewardprof_test")
    # the client a server uses to reach other servers: none here (no head server)
    client = ServerClient(
        head_server_config=BaseServerConfig(host="127.0.0.1", port=1),
        global_config_dict=OmegaConf.create({}),
    )
    app = cls(config=config, server_client=client).setup_webserver()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
