pytest_plugins = ["vllm_server"]  # the real vLLM server fixture (tests/vllm_server.py)
