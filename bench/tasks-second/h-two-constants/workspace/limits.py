# Limits of the service.
MAX_USERS = 10
MAX_ITEMS = 5
TIMEOUT = 5
