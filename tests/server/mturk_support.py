"""Canned MTurk answers and expected requests for tests that drive server/mturk.py through botocore's Stubber.

A support module, not a test module: test modules import it (they never import each other).
"""
from __future__ import annotations

import datetime as dt

from botocore.stub import ANY

from server.mturk import EXTERNAL_QUESTION_NS, QUAL_APPROVAL_RATE, QUAL_LOCALE, QUAL_NUMBER_APPROVED

NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)
URL = "https://lab.example.org/s/demo"


def _hit(hit_id, token, n=9, status="Assignable"):
    return {"HITId": hit_id, "HITTypeId": "HT1", "MaxAssignments": n, "HITStatus": status,
            "RequesterAnnotation": token, "Expiration": NOW + dt.timedelta(days=7), "Reward": "0.50"}


def _assignment(i, hit_id="HIT1", status="Submitted"):
    return {"AssignmentId": f"ASG{i:04d}", "WorkerId": f"W{i:04d}", "HITId": hit_id, "AssignmentStatus": status,
            "SubmitTime": NOW}


def _expect_hit_type(stubber, qual_id="QT-TOOK-PART", create_qual=True):
    if create_qual:
        stubber.add_response("create_qualification_type", {"QualificationType": {"QualificationTypeId": qual_id}},
                             {"Name": "perceptlab: took part", "Keywords": "perceptlab", "Description": ANY,
                              "QualificationTypeStatus": "Active"})
    guard = "DiscoverPreviewAndAccept"
    stubber.add_response("create_hit_type", {"HITTypeId": "HT1"}, {
        "AutoApprovalDelayInSeconds": 3 * 86400, "AssignmentDurationInSeconds": 7200, "Reward": "0.50",
        "Title": ANY, "Keywords": ANY, "Description": ANY,
        "QualificationRequirements": [
            {"QualificationTypeId": QUAL_APPROVAL_RATE, "Comparator": "GreaterThanOrEqualTo", "IntegerValues": [98],
             "ActionsGuarded": guard},
            {"QualificationTypeId": QUAL_NUMBER_APPROVED, "Comparator": "GreaterThanOrEqualTo",
             "IntegerValues": [1000], "ActionsGuarded": guard},
            {"QualificationTypeId": QUAL_LOCALE, "Comparator": "In", "LocaleValues": [{"Country": "US"}],
             "ActionsGuarded": guard},
            {"QualificationTypeId": qual_id, "Comparator": "DoesNotExist", "ActionsGuarded": guard}]})


def _create_params(token, n=9):
    question = (f'<ExternalQuestion xmlns="{EXTERNAL_QUESTION_NS}"><ExternalURL>{URL}</ExternalURL>'
                "<FrameHeight>0</FrameHeight></ExternalQuestion>")
    return {"HITTypeId": "HT1", "MaxAssignments": n, "LifetimeInSeconds": 7 * 86400, "Question": question,
            "RequesterAnnotation": token, "UniqueRequestToken": token}
