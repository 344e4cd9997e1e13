"""Scripts that the engine's interpreter runs as files (rewardprof itself may not be installed
there). They sit alone in this folder because Python puts a script's folder first on sys.path:
beside engine/http_retry.py or engine/client.py, a sibling could shadow a library's import."""
