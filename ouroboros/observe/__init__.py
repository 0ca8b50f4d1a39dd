"""Reading a run from outside: `tail`, `status`, `report`, and the lines they show."""
