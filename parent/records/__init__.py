"""What a run leaves and shows: typed events, the run folder, text made safe for a terminal."""
