"""The view: what a run reported (history), its panel, plots and text forms; no TensorFlow."""
