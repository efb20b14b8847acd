"""perceptlab server: Flask app, models, MTurk and storage services, and the CLI.

Importing this package stays cheap: the CLI's analysis and stimulus commands
must not pay for Flask or SQLAlchemy.
"""
