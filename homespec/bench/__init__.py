"""`homespec bench`: methods side by side on one prompt set."""
