"""What ``scripts/run`` needs beyond the servers: the real model's bring-up (build the llama.cpp
engine when it is missing, with progress, then deploy the SmolLM2 recipe). Plain modules; the
command is ``manage.py real_model``."""
