"""The validation corpus (published runs as data, one file per source) and the error bands
scored on it: `corpus` reads the files, `bands` gives a prediction its band from the scored
residuals shipped beside them (`accuracy.json`, written by `ceiling validate --write-bands`)."""
