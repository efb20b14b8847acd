"""Amazon Mechanical Turk: the one module that talks to MTurk (boto3 ``mturk``, API 2017-01-17).

Every MTurk call of perceptlab goes through :class:`MTurkService`, which keeps
the database in line with MTurk:

* HITs are recorded (status ``creating``) *before* ``create_hit_with_hit_type``
  and carry a deterministic ``UniqueRequestToken``; a retried create that MTurk
  answers with "HIT already exists" is looked up (``list_hits``, matching
  ``RequesterAnnotation``) instead of posting a second HIT.
* Bonuses are recorded (status ``pending``) before ``send_bonus``, with a token
  derived from the assignment and the reason, and the run that sends one first
  claims it (:mod:`server.claims`: one conditional UPDATE, committed before the
  call), so two runs never both call. A bonus whose run died after claiming it is
  checked against MTurk's ``list_bonus_payments`` before it is sent again (with
  the same token): it is never paid twice, even after MTurk forgets the token.
* Approvals are claimed the same way (``approve_assignment`` pays the reward).
* ``list_hits`` and ``list_assignments_for_hit`` are always paginated.
* HITs hold at most 9 assignments by default (MTurk charges 40% instead of 20%
  from 10 assignments on).

The sandbox is the default everywhere; the live marketplace needs ``live=True``.
Throttling is retried twice: by botocore's "standard" retry mode and, for the
calls that reach :meth:`MTurkService._call`, by a small backoff loop of ours.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import math
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from typing import Any
from xml.sax.saxutils import escape

from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from . import claims
from .models import (
    Assignment,
    Bonus,
    MTurkAssignment,
    MTurkHit,
    MTurkQualification,
    Study,
    Worker,
    utcnow,
)
from .paradigms import paradigm_for, spec_from_config
from .paradigms.entry import mturk_question_url
from .paradigms.stages import TURNED_AWAY
from .paradigms.params import MTURK_DEFAULTS
from .payments import pay_unit

SANDBOX_ENDPOINT = "https://mturk-requester-sandbox.us-east-1.amazonaws.com"
LIVE_ENDPOINT = "https://mturk-requester.us-east-1.amazonaws.com"
SANDBOX_WORKER_URL = "https://workersandbox.mturk.com"
LIVE_WORKER_URL = "https://worker.mturk.com"
EXTERNAL_QUESTION_NS = ("http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2006-07-14/"
                        "ExternalQuestion.xsd")

# System qualification types.
QUAL_APPROVAL_RATE = "000000000000000000L0"
QUAL_NUMBER_APPROVED = "00000000000000000040"
QUAL_LOCALE = "00000000000000000071"
QUAL_MASTERS = {True: "2ARFPLSP75KLA8M8DH1HTEQVJT3SY6", False: "2F1QJWKUDD8XADTFD2Q0G6UTO95ALH"}  # sandbox?

TOOK_PART = "perceptlab: took part"
# Motion studies: the RDK screening's r (u and v pooled) x 100, for HITs that want screened workers only.
SCREENING = "perceptlab: motion screening r x100"
PAGE_SIZE = 100          # list_* calls return at most 100 per page
NOTIFY_CHUNK = 100       # notify_workers takes at most 100 worker IDs
DEFAULT_PER_HIT = 9      # 10+ assignments per HIT cost 40% commission instead of 20%
THROTTLE_CODES = {"ThrottlingException", "Throttling", "TooManyRequestsException", "RequestLimitExceeded",
                  "ServiceUnavailable"}
PAST = dt.datetime(2015, 1, 1, tzinfo=dt.UTC)

# Defaults of the optional [mturk] section of a study's config (documented beside the study file's keys).
DEFAULT_SETTINGS = MTURK_DEFAULTS


class MTurkError(RuntimeError):
    """An MTurk call failed or an action is not possible; ``str()`` says what to do."""


def make_client(*, live: bool = False, region: str = "us-east-1", max_attempts: int = 5,
                use_instance_metadata: bool = False, **kwargs):
    """A boto3 ``mturk`` client: the sandbox unless ``live``.

    Credentials come from the environment (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``),
    ``AWS_PROFILE`` and the shared files (~/.aws/credentials), or ``kwargs``; the EC2 instance
    metadata service and the container credentials endpoint are asked only when
    ``use_instance_metadata`` (``[mturk] use_instance_metadata``), see :mod:`server.aws`.
    Throttled calls are retried by botocore ("standard" retry mode, ``max_attempts`` in all).
    """
    from botocore.config import Config

    from .aws import boto3_session

    config = Config(retries={"mode": "standard", "max_attempts": max_attempts}, region_name=region)
    return boto3_session(use_instance_metadata=use_instance_metadata).client(
        "mturk", region_name=region, endpoint_url=LIVE_ENDPOINT if live else SANDBOX_ENDPOINT, config=config,
        **kwargs)


def check_credentials(*, use_instance_metadata: bool = False) -> None:
    """Raise :class:`MTurkError` naming the environment variables when no credentials are found.

    Without ``use_instance_metadata`` this reads only the environment and local files: no network call.
    """
    from .aws import MISSING_CREDENTIALS, has_credentials

    if not has_credentials(use_instance_metadata=use_instance_metadata):
        raise MTurkError(MISSING_CREDENTIALS + " for an IAM user allowed to use MTurk")


def instance_metadata_allowed(config: dict[str, Any]) -> bool:
    """``[mturk] use_instance_metadata`` of the server configuration (default False)."""
    return bool((config.get("mturk") or {}).get("use_instance_metadata", False))


def study_settings(study: Study) -> dict[str, Any]:
    """The study's MTurk settings: ``config["mturk"]`` over its paradigm's HIT texts
    (:attr:`~server.paradigms.core.Paradigm.mturk_settings`) over :data:`DEFAULT_SETTINGS`."""
    return {**DEFAULT_SETTINGS, **paradigm_for(study).mturk_settings, **(study.config.get("mturk") or {})}


def hit_reward(study: Study) -> Decimal:
    """The HIT reward: the reward of each unit of pay the HIT requires (paired comparison: ``reward_per_page``
    for each of the ``min_pages`` pages; motion matching: one session's reward)."""
    return pay_unit(study).hit_reward


def _error_code(exc: Exception) -> str:
    return getattr(exc, "response", {}).get("Error", {}).get("Code", "")


def _error_message(exc: Exception) -> str:
    return getattr(exc, "response", {}).get("Error", {}).get("Message", "") or str(exc)


def _is_duplicate_token(exc: Exception) -> bool:
    """MTurk's refusal of a repeated ``UniqueRequestToken``."""
    code, message = _error_code(exc), _error_message(exc).lower()
    return code in ("HitAlreadyExists", "HITAlreadyExists") or (
        code in ("RequestError", "ServiceFault") and ("uniquerequesttoken" in message or "unique request token"
                                                      in message or "already exists" in message))


class MTurkService:
    """MTurk operations over a boto3 client and a database session (the caller commits, except where a
    method says it commits itself: before and after calls that move money or create HITs).

    Parameters
    ----------
    client
        From :func:`make_client` (or a stubbed client in tests).
    session : Session
    sandbox : bool or None
        Defaults to "the client's endpoint is not the live one".
    sleep
        Backoff function for throttling retries (tests pass a no-op).
    """

    def __init__(self, client, session: Session, *, sandbox: bool | None = None,
                 sleep: Callable[[float], None] = time.sleep, max_attempts: int = 4):
        self.client = client
        self.session = session
        if sandbox is None:
            sandbox = "sandbox" in str(getattr(getattr(client, "meta", None), "endpoint_url", "sandbox"))
        self.sandbox = sandbox
        self.sleep = sleep
        self.max_attempts = max_attempts

    # ------------------------------------------------------------ plumbing

    def _call(self, operation: str, **params) -> dict:
        """One API call; throttling errors are retried with exponential backoff."""
        from botocore.exceptions import ClientError

        for attempt in range(self.max_attempts):
            try:
                return getattr(self.client, operation)(**params)
            except ClientError as exc:
                if _error_code(exc) in THROTTLE_CODES and attempt + 1 < self.max_attempts:
                    self.sleep(min(8.0, 0.5 * 2 ** attempt))
                    continue
                raise

    def _paginate(self, operation: str, key: str, **params) -> Iterator[dict]:
        """Every item of a paginated list call (NextToken loop, MaxResults 100)."""
        token = None
        while True:
            page = self._call(operation, MaxResults=PAGE_SIZE, **params, **({"NextToken": token} if token else {}))
            yield from page.get(key, [])
            token = page.get("NextToken")
            if not token:
                return

    # ------------------------------------------------------------ account

    def balance(self) -> str:
        """The account's available balance in USD, as a string ("10000.00" in the sandbox)."""
        return self._call("get_account_balance")["AvailableBalance"]

    # ------------------------------------------------------------ HITs

    @staticmethod
    def external_question_xml(url: str) -> str:
        """The ExternalQuestion that shows ``url`` (HTTPS only) in a frame fitted to the worker's window."""
        if not url.lower().startswith("https://"):
            raise MTurkError(f"the ExternalQuestion URL must start with https:// (MTurk refuses others): {url!r}")
        return (f'<ExternalQuestion xmlns="{EXTERNAL_QUESTION_NS}">'
                f"<ExternalURL>{escape(url)}</ExternalURL><FrameHeight>0</FrameHeight></ExternalQuestion>")

    def took_part_qualification(self, study: Study) -> str:
        """The QualificationTypeId of the "took part" type (lab-wide or per study), created once."""
        settings = study_settings(study)
        name = TOOK_PART if settings["took_part_scope"] == "lab" else f"{TOOK_PART} in {study.slug}"
        return self._qualification_type(name, "Granted to workers who took part in a perceptlab study "
                                              "(or failed its quiz); such workers cannot take part again.")

    def screening_qualification(self) -> str:
        """The QualificationTypeId of the lab-wide motion-screening score (r x 100), created once."""
        return self._qualification_type(SCREENING, "The correlation (x 100) between a worker's reported and "
                                                   "true motion in perceptlab's random-dot screening.")

    def _qualification_type(self, name: str, description: str) -> str:
        row = self.session.scalar(select(MTurkQualification).where(MTurkQualification.name == name,
                                                                   MTurkQualification.sandbox == self.sandbox))
        if row is not None:
            return row.qualification_type_id
        from botocore.exceptions import ClientError

        try:
            response = self._call("create_qualification_type", Name=name, Keywords="perceptlab",
                                  Description=description, QualificationTypeStatus="Active")
            type_id = response["QualificationType"]["QualificationTypeId"]
        except ClientError as exc:  # the type exists on MTurk but not in this database
            type_id = next((q["QualificationTypeId"] for q in self._paginate(
                "list_qualification_types", "QualificationTypes", Query=name, MustBeRequestable=False,
                MustBeOwnedByCaller=True) if q.get("Name") == name), None)
            if type_id is None:
                raise MTurkError(f"cannot create the qualification type {name!r}: {_error_message(exc)}") from exc
        self.session.add(MTurkQualification(name=name, qualification_type_id=type_id, sandbox=self.sandbox))
        self.session.flush()
        return type_id

    def qualification_requirements(self, study: Study) -> list[dict]:
        settings = study_settings(study)
        guard = "DiscoverPreviewAndAccept"
        requirements = []
        if settings["min_approval_rate"]:
            requirements.append({"QualificationTypeId": QUAL_APPROVAL_RATE, "Comparator": "GreaterThanOrEqualTo",
                                 "IntegerValues": [int(settings["min_approval_rate"])], "ActionsGuarded": guard})
        if settings["min_approved_hits"]:
            requirements.append({"QualificationTypeId": QUAL_NUMBER_APPROVED, "Comparator": "GreaterThanOrEqualTo",
                                 "IntegerValues": [int(settings["min_approved_hits"])], "ActionsGuarded": guard})
        if settings["locales"]:
            requirements.append({"QualificationTypeId": QUAL_LOCALE, "Comparator": "In",
                                 "LocaleValues": [{"Country": c} for c in settings["locales"]],
                                 "ActionsGuarded": guard})
        if settings["masters"]:
            requirements.append({"QualificationTypeId": QUAL_MASTERS[self.sandbox], "Comparator": "Exists",
                                 "ActionsGuarded": guard})
        if settings["require_screening"]:
            requirements.append({"QualificationTypeId": self.screening_qualification(),
                                 "Comparator": "GreaterThanOrEqualTo",
                                 "IntegerValues": [int(settings["require_screening"])], "ActionsGuarded": guard})
        requirements.append({"QualificationTypeId": self.took_part_qualification(study),
                             "Comparator": "DoesNotExist", "ActionsGuarded": guard})
        return requirements

    def ensure_hit_type(self, study: Study) -> str:
        """The HITTypeId for the study (MTurk returns the same ID for the same properties)."""
        settings = study_settings(study)
        response = self._call(
            "create_hit_type",
            AutoApprovalDelayInSeconds=int(settings["auto_approval_days"]) * 86400,
            AssignmentDurationInSeconds=int(settings["assignment_duration_minutes"]) * 60,
            Reward=str(hit_reward(study)), Title=settings["title"], Keywords=settings["keywords"],
            Description=settings["description"], QualificationRequirements=self.qualification_requirements(study))
        return response["HITTypeId"]

    @staticmethod
    def request_token(study: Study, batch_index: int, launch_id: str) -> str:
        token = f"{study.slug[:40]}-{batch_index}-{launch_id}"
        assert 1 <= len(token) <= 64, token
        return token

    def launch(self, study: Study, *, assignments_total: int, url: str, per_hit: int = DEFAULT_PER_HIT,
               lifetime: dt.timedelta = dt.timedelta(days=7), launch_id: str | None = None,
               progress: Callable[[Iterable], Iterable] = lambda it: it) -> list[MTurkHit]:
        """Post ``ceil(assignments_total / per_hit)`` HITs to ``url`` (the server or the study's ``/s/`` URL,
        to which the study's access key and MTurk signature are added); commits before and after each
        create call.

        Calling again with the same ``launch_id`` finishes an interrupted launch: HITs already
        created are kept, the others are created (or found, when MTurk already made them).
        """
        if assignments_total < 1 or per_hit < 1:
            raise MTurkError("the number of assignments and assignments per HIT must be positive")
        # The study's [entry] rules hold for MTurk entries too: the HIT's URL carries its access key and
        # MTurk signature (server/paradigms/entry.py).
        question = self.external_question_xml(mturk_question_url(study, spec_from_config(study.config), url))
        launch_id = launch_id or uuid.uuid4().hex[:12]
        hit_type_id = self.ensure_hit_type(study)
        reward = str(hit_reward(study))
        sizes = [min(per_hit, assignments_total - i * per_hit) for i in range(math.ceil(assignments_total / per_hit))]
        hits = []
        for index in progress(range(len(sizes))):
            token = self.request_token(study, index, launch_id)
            hit = self.session.scalar(select(MTurkHit).where(MTurkHit.unique_request_token == token))
            if hit is None:
                hit = MTurkHit(study_id=study.id, unique_request_token=token, launch_id=launch_id, batch_index=index,
                               max_assignments=sizes[index], reward=reward, hit_type_id=hit_type_id,
                               status="creating", sandbox=self.sandbox)
                self.session.add(hit)
            self.session.commit()  # the intent is on disk before MTurk is asked
            if hit.hit_id is None:
                self._create_hit(hit, question, lifetime)
                self.session.commit()
            hits.append(hit)
        return hits

    def _create_hit(self, hit: MTurkHit, question: str, lifetime: dt.timedelta) -> None:
        from botocore.exceptions import ClientError

        try:
            created = self._call("create_hit_with_hit_type", HITTypeId=hit.hit_type_id,
                                 MaxAssignments=hit.max_assignments, LifetimeInSeconds=int(lifetime.total_seconds()),
                                 Question=question, RequesterAnnotation=hit.unique_request_token,
                                 UniqueRequestToken=hit.unique_request_token)["HIT"]
        except ClientError as exc:
            if not _is_duplicate_token(exc):
                raise MTurkError(f"create_hit_with_hit_type failed: {_error_message(exc)}") from exc
            created = self.find_hit_by_token(hit.unique_request_token)
            if created is None:
                raise MTurkError(f"MTurk says a HIT with token {hit.unique_request_token!r} exists, "
                                 "but list_hits does not show it; try again later") from exc
        self._update_hit(hit, created)

    def find_hit_by_token(self, token: str) -> dict | None:
        return next((h for h in self._paginate("list_hits", "HITs") if h.get("RequesterAnnotation") == token), None)

    @staticmethod
    def _update_hit(hit: MTurkHit, data: dict) -> None:
        hit.hit_id = data["HITId"]
        hit.hit_type_id = data.get("HITTypeId", hit.hit_type_id)
        hit.status = data.get("HITStatus", hit.status)
        if data.get("Expiration"):
            hit.expires_at = data["Expiration"]

    def hits(self, study: Study) -> list[MTurkHit]:
        return list(self.session.scalars(select(MTurkHit).where(MTurkHit.study_id == study.id,
                                                                MTurkHit.sandbox == self.sandbox)
                                         .order_by(MTurkHit.id)))

    def open_hits(self, study: Study) -> list[MTurkHit]:
        """The study's posted HITs that are not expired, deleted or disposed yet."""
        return [h for h in self.hits(study) if h.hit_id and h.status not in ("expired", "deleted", "Disposed")]

    def expire_hit(self, hit_id: str) -> None:
        """Stop new workers from accepting the HIT (workers who accepted it can still submit)."""
        self._call("update_expiration_for_hit", HITId=hit_id, ExpireAt=PAST)
        hit = self.session.scalar(select(MTurkHit).where(MTurkHit.hit_id == hit_id))
        if hit is not None:
            hit.status, hit.expires_at = "expired", utcnow()

    def expire_study(self, study: Study) -> int:
        """Stop recruiting for the study: expire every open HIT (committing after each), the same stop rule as
        Prolific's STOP (server/prolific.py). A HIT that MTurk no longer has counts as expired, and HITs already
        expired are skipped, so a second call (or one after an interruption) expires the rest and fails on none.
        Returns how many HITs this call expired."""
        from botocore.exceptions import ClientError

        count = 0
        for hit in self.open_hits(study):
            try:
                self.expire_hit(hit.hit_id)
            except ClientError as exc:
                if "does not exist" not in _error_message(exc).lower():
                    raise MTurkError(f"cannot expire HIT {hit.hit_id}: {_error_message(exc)}") from exc
                hit.status, hit.expires_at = "expired", utcnow()
            self.session.commit()
            count += 1
        return count

    def delete_hit(self, hit_id: str) -> None:
        """Delete an expired HIT whose assignments are all approved or rejected."""
        from botocore.exceptions import ClientError

        try:
            self._call("delete_hit", HITId=hit_id)
        except ClientError as exc:
            raise MTurkError(f"cannot delete HIT {hit_id}: {_error_message(exc)} (expire it and approve or "
                             "reject its submitted assignments first)") from exc
        hit = self.session.scalar(select(MTurkHit).where(MTurkHit.hit_id == hit_id))
        if hit is not None:
            hit.status = "deleted"

    # ------------------------------------------------------------ assignments

    def reconcile(self, study: Study, *, qualify: bool = False,
                  progress: Callable[[Iterable], Iterable] = lambda it: it) -> dict[str, int]:
        """Bring the database in line with MTurk for every HIT of the study (HIT status, assignments and
        their workers); with ``qualify``, newly seen workers get the "took part" qualification.

        Paradigms whose workers may take several assignments (motion matching: several sessions, each
        with other clips) block only the workers the study turned away; paradigms that screen workers
        give every screened worker the lab-wide screening score (:meth:`screening_qualification`) that
        other HITs can require.
        """
        counts = {"hits": 0, "assignments": 0, "new": 0}
        paradigm = paradigm_for(study)
        qualification = self.took_part_qualification(study) if qualify else None
        block_new_workers = qualification is not None and not paradigm.repeat_workers
        for hit in progress([h for h in self.hits(study) if h.hit_id and h.status != "deleted"]):
            data = self._call("get_hit", HITId=hit.hit_id)["HIT"]
            hit.status = data.get("HITStatus", hit.status)
            hit.expires_at = data.get("Expiration", hit.expires_at)
            counts["hits"] += 1
            for item in self._paginate("list_assignments_for_hit", "Assignments", HITId=hit.hit_id,
                                       AssignmentStatuses=["Submitted", "Approved", "Rejected"]):
                row, new = self._record_assignment(study, item)
                counts["assignments"] += 1
                counts["new"] += new
                if new and block_new_workers:
                    self.qualify(row.worker_id, qualification)
        if qualification:
            # Workers who failed the quiz or were stopped usually return the HIT instead of submitting
            # it, so MTurk never lists them: block them from the study's database records.
            blocked = self.session.scalars(select(Worker.external_id).where(
                Worker.study_id == study.id, Worker.platform == "mturk", ~Worker.pilot,  # server/pilot.py
                Worker.status.in_(TURNED_AWAY)))
            for worker_id in blocked:
                self.qualify(worker_id, qualification)
        scores = paradigm.screening_scores(self.session, study) if qualify else None
        if scores is not None:
            counts["screened"] = self.grant_screening_scores(scores)
        self.session.flush()
        return counts

    def grant_screening_scores(self, scores: list[tuple[str, int]]) -> int:
        """Give each ``(MTurk worker ID, score 0..100)`` the lab-wide screening qualification with that
        score (MTurk integer values); return how many were given."""
        if not scores:
            return 0
        type_id = self.screening_qualification()
        for worker_id, score in scores:
            self._call("associate_qualification_with_worker", QualificationTypeId=type_id, WorkerId=worker_id,
                       IntegerValue=score, SendNotification=False)
        return len(scores)

    def _record_assignment(self, study: Study, item: dict) -> tuple[MTurkAssignment, bool]:
        row = self.session.scalar(select(MTurkAssignment).where(MTurkAssignment.assignment_id == item["AssignmentId"]))
        new = row is None
        if new:
            row = MTurkAssignment(study_id=study.id, assignment_id=item["AssignmentId"], hit_id=item["HITId"],
                                  worker_id=item["WorkerId"], status=item["AssignmentStatus"])
            self.session.add(row)
        row.status = item["AssignmentStatus"]
        row.submit_time = item.get("SubmitTime", row.submit_time)
        row.approved_at = item.get("ApprovalTime", row.approved_at)
        row.rejected_at = item.get("RejectionTime", row.rejected_at)
        row.feedback = item.get("RequesterFeedback", row.feedback)
        row.updated_at = utcnow()
        if row.local_assignment_id is None:
            row.local_assignment_id = self.session.scalar(
                select(Assignment.id).where(Assignment.study_id == study.id, Assignment.platform == "mturk",
                                            Assignment.external_id == item["AssignmentId"]))
        return row, new

    def _assignment_row(self, assignment_id: str) -> MTurkAssignment | None:
        return self.session.scalar(select(MTurkAssignment).where(MTurkAssignment.assignment_id == assignment_id))

    def _fetch_status(self, assignment_id: str) -> str:
        from botocore.exceptions import ClientError

        try:
            item = self._call("get_assignment", AssignmentId=assignment_id)["Assignment"]
        except ClientError as exc:
            raise MTurkError(f"no assignment {assignment_id} on MTurk: {_error_message(exc)}") from exc
        row = self._assignment_row(assignment_id)
        if row is not None:
            row.status = item["AssignmentStatus"]
        return item["AssignmentStatus"]

    def approve(self, assignment_id: str, feedback: str | None = None) -> str:
        """Approve a submitted assignment; one that is approved already counts as success.

        An assignment the database knows is claimed first (:mod:`server.claims`), so of two runs one sends the
        approval ("approval being sent by another run" for the other); one it does not know yet relies on
        MTurk's own state (an approved assignment is refused, never paid twice). Commits.

        Returns "approved" or "already approved"; raises :class:`MTurkError` for any other status.
        """
        row = self._assignment_row(assignment_id)
        if row is not None and row.status == "Approved":
            return "already approved"
        token = None
        if row is not None:
            now = utcnow()
            token, rows = claims.claim(self.session, MTurkAssignment,
                                       [MTurkAssignment.id == row.id, MTurkAssignment.status != "Approved",
                                        or_(MTurkAssignment.claimed_at.is_(None),
                                            MTurkAssignment.claimed_at <= now - claims.LEASE)], now)
            if not rows:
                self.session.refresh(row)
                return "already approved" if row.status == "Approved" else "approval being sent by another run"
            row = rows[0]
        try:
            status = self._fetch_status(assignment_id)
            if status == "Approved":
                return "already approved"
            if status != "Submitted":
                hint = " (use override to approve a rejected assignment)" if status == "Rejected" else ""
                raise MTurkError(f"assignment {assignment_id} is {status}, not Submitted: cannot approve it{hint}")
            self._call("approve_assignment", AssignmentId=assignment_id,
                       **({"RequesterFeedback": feedback} if feedback else {}))
        except Exception:
            if token is not None:  # free the row for the next run (MTurk keeps the truth of what happened)
                self.session.rollback()
                claims.finish(self.session, MTurkAssignment, token, [], claimed_at=None)
            raise
        if row is not None:
            row.status, row.approved_at, row.feedback = "Approved", utcnow(), feedback or row.feedback
            self.session.commit()
        return "approved"

    def reject(self, assignment_id: str, feedback: str) -> str:
        """Reject a submitted assignment; MTurk requires feedback for the worker."""
        if not (feedback or "").strip():
            raise MTurkError("rejecting needs feedback for the worker (why the work was rejected)")
        status = self._fetch_status(assignment_id)
        if status == "Rejected":
            return "already rejected"
        if status != "Submitted":
            raise MTurkError(f"assignment {assignment_id} is {status}, not Submitted: cannot reject it")
        self._call("reject_assignment", AssignmentId=assignment_id, RequesterFeedback=feedback)
        row = self._assignment_row(assignment_id)
        if row is not None:
            row.status, row.rejected_at, row.feedback = "Rejected", utcnow(), feedback
        return "rejected"

    def override_rejection(self, assignment_id: str, feedback: str | None = None) -> str:
        """Approve an assignment that was rejected (pays the worker after all)."""
        status = self._fetch_status(assignment_id)
        if status == "Approved":
            return "already approved"
        if status != "Rejected":
            raise MTurkError(f"assignment {assignment_id} is {status}, not Rejected: nothing to override")
        self._call("approve_assignment", AssignmentId=assignment_id, OverrideRejection=True,
                   **({"RequesterFeedback": feedback} if feedback else {}))
        row = self._assignment_row(assignment_id)
        if row is not None:
            row.status, row.approved_at = "Approved", utcnow()
        return "approved"

    # ------------------------------------------------------------ money and messages

    @staticmethod
    def bonus_token(assignment_id: str, reason: str) -> str:
        digest = hashlib.sha256(f"{assignment_id}\n{reason}".encode()).hexdigest()[:40]
        return f"pl-bonus-{digest}"

    def grant_bonus(self, worker_id: str, assignment_id: str, amount: str | Decimal, reason: str, *,
                    study: Study | None = None) -> str:
        """Pay a bonus at most once per (assignment, reason); commits before and after ``send_bonus``.

        The bonus is recorded (unique per assignment and reason), then claimed (:mod:`server.claims`): of two runs
        only the claimant calls. A bonus claimed by an earlier run that never recorded the outcome (it died, or the
        call failed) is looked up in MTurk's ``list_bonus_payments`` first and sent again only when MTurk has no
        such payment, with the same ``UniqueRequestToken``.

        Returns "sent", "already sent" (paid before: no request is made) or "being sent by another run".
        """
        from botocore.exceptions import ClientError

        amount = str(Decimal(str(amount)).quantize(Decimal("0.01")))
        if Decimal(amount) <= 0:
            raise MTurkError(f"a bonus must be positive, not {amount}")
        if not reason.strip():
            raise MTurkError("a bonus needs a reason (the worker sees it)")
        bonus = self._bonus_row(assignment_id, reason)
        if bonus is None:
            self.session.add(Bonus(study_id=study.id if study else None, assignment_id=assignment_id,
                                   worker_id=worker_id, amount=amount, reason=reason,
                                   unique_request_token=self.bonus_token(assignment_id, reason), status="pending",
                                   sandbox=self.sandbox))
            try:
                self.session.commit()  # recorded before the money moves
            except IntegrityError:  # another run recorded it a moment ago
                self.session.rollback()
            bonus = self._bonus_row(assignment_id, reason)
        if bonus.status == "sent":
            return "already sent"
        if bonus.amount != amount or bonus.worker_id != worker_id:
            raise MTurkError(f"a pending bonus for {assignment_id} ({reason!r}) was recorded as ${bonus.amount} to "
                             f"{bonus.worker_id}; it must be retried with the same amount and worker")
        earlier_claim = bonus.claim is not None
        now = utcnow()
        _, rows = claims.claim(self.session, Bonus,
                               [Bonus.id == bonus.id, Bonus.status == "pending",
                                or_(Bonus.claimed_at.is_(None), Bonus.claimed_at <= now - claims.LEASE)], now)
        if not rows:
            bonus = self._bonus_row(assignment_id, reason)
            return "already sent" if bonus.status == "sent" else "being sent by another run"
        bonus = rows[0]
        if earlier_claim and self._bonus_listed(bonus):  # an earlier run's call went through
            bonus.status, bonus.sent_at = "sent", utcnow()
            self.session.commit()
            return "sent"
        try:
            self._call("send_bonus", WorkerId=bonus.worker_id, BonusAmount=bonus.amount, AssignmentId=assignment_id,
                       Reason=reason, UniqueRequestToken=bonus.unique_request_token)
        except ClientError as exc:
            if not _is_duplicate_token(exc):
                # Keep the claim's token (the next run checks MTurk's list first) but let it retry at once.
                bonus.claimed_at = None
                self.session.commit()
                raise MTurkError(f"send_bonus failed for {assignment_id}: {_error_message(exc)} (the bonus stays "
                                 "pending; retrying is safe)") from exc
        bonus.status, bonus.sent_at = "sent", utcnow()
        self.session.commit()
        return "sent"

    def _bonus_row(self, assignment_id: str, reason: str) -> Bonus | None:
        return self.session.scalar(select(Bonus).where(Bonus.assignment_id == assignment_id, Bonus.reason == reason)
                                   .execution_options(populate_existing=True))

    def _bonus_listed(self, bonus: Bonus) -> bool:
        """Whether MTurk lists a payment of this bonus (same assignment, worker, reason and amount)."""
        return any(item.get("Reason") == bonus.reason and item.get("WorkerId") == bonus.worker_id
                   and Decimal(str(item.get("BonusAmount", "0"))) == Decimal(bonus.amount)
                   for item in self._paginate("list_bonus_payments", "BonusPayments",
                                              AssignmentId=bonus.assignment_id))

    def notify(self, worker_ids: Iterable[str], subject: str, message: str) -> list[dict]:
        """Message workers (only those we paid or rejected), 100 per call; returns MTurk's failure statuses."""
        ids = list(dict.fromkeys(worker_ids))
        failures: list[dict] = []
        for start in range(0, len(ids), NOTIFY_CHUNK):
            response = self._call("notify_workers", Subject=subject, MessageText=message,
                                  WorkerIds=ids[start:start + NOTIFY_CHUNK])
            failures.extend(response.get("NotifyWorkersFailureStatuses", []))
        return failures

    def qualify(self, worker_id: str, qualification_type_id: str | None = None, *, study: Study | None = None) -> None:
        """Give a worker the "took part" qualification (silently): they cannot take part again."""
        if qualification_type_id is None:
            if study is None:
                raise MTurkError("qualify needs the qualification type or the study")
            qualification_type_id = self.took_part_qualification(study)
        self._call("associate_qualification_with_worker", QualificationTypeId=qualification_type_id,
                   WorkerId=worker_id, IntegerValue=1, SendNotification=False)

    def study_worker_ids(self, study: Study) -> list[str]:
        """MTurk WorkerIds seen in the study (perceptlab workers who are not pilots, and reconciled assignments)."""
        ids = set(self.session.scalars(select(Worker.external_id).where(Worker.study_id == study.id,
                                                                        Worker.platform == "mturk", ~Worker.pilot)))
        ids |= set(self.session.scalars(select(MTurkAssignment.worker_id).where(MTurkAssignment.study_id == study.id)))
        return sorted(ids)
