"""The ground floor: what every layer may use, and what imports nothing of microgpt above it.

The errors a user can cause (errors.py), the family and backend names (registry.py), the version, the
thread knob and the machine's description (threads.py, machine.py), progress output (progress.py), a stop by
signal (stops.py), reading a file that may be a pipe or a device (user_files.py), and how a setting is declared
and checked (fields.py, checks.py). It imports nothing outside core/; all may import it.
"""
