# Settings of the web server.
HOST = "0.0.0.0"
PORT = 8000
WORKERS = 4
