"""The notebook side: the %%supervise magics, the runs and their threads."""
