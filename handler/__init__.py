"""The AWS Lambda entrypoint (app.py); SAM packages this folder as the function code."""
