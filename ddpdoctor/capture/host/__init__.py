"""ddpdoctor's own side of the capture: the launcher of ``ddpdoctor run`` (the user's command with the agent
injected, the output pumps, the orphan reaper), the host facts, the bundle's manifest, and the records a
rank writes in the launcher's place when capture is switched on from the environment (``env_records.py``).
Plain package modules: they may import the rest of ddpdoctor's bottom layer, never torch.
"""
