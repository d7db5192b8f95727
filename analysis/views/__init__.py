"""What is shown of a replay: inspection, who gets dropped, comparisons, plots and the HTML report."""
