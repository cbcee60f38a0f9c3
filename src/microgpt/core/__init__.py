"""The ground floor: what every layer may use, and what imports nothing of microgpt above it.

The errors a user can cause (errors.py), the registry of backend and family names (registry.py), the thread
knob and the machine's description (threads.py, machine.py), progress output (progress.py), and how a user
setting is declared and checked (fields.py, checks.py), which every layer's settings are made with.
It imports nothing of microgpt outside core/; every other package may import it.
"""
