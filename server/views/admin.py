"""Experimenter pages (placeholder until the dashboard lands)."""
from flask import Blueprint

bp = Blueprint("admin", __name__, url_prefix="/admin")
