"""boto3 sessions that only look for credentials where the experimenter put them.

botocore's default credential chain (``botocore.credentials.create_credential_resolver``)
tries, in order: the environment (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/
``AWS_SESSION_TOKEN``), assume-role and web-identity profiles, SSO, the shared credentials
file (``~/.aws/credentials`` or ``AWS_SHARED_CREDENTIALS_FILE``), ``aws login``, a
``credential_process``, the config file (``~/.aws/config`` or ``AWS_CONFIG_FILE``), the
legacy boto2 files, and last the two network providers: the container credentials endpoint
(``container-role``: ECS/EKS, only when ``AWS_CONTAINER_CREDENTIALS_*`` is set) and the EC2
instance metadata service (``iam-role``: HTTP to 169.254.169.254, tried whenever nothing
else answered). So a server with no credentials at all probes the metadata address each
time it looks for them.

:func:`boto3_session` removes both network providers unless the experimenter opts in
(``[mturk] use_instance_metadata`` / ``[storage] use_instance_metadata``), and keeps
botocore's "auto" defaults mode (which asks the metadata service for the region) from
running. Nothing here touches ``os.environ``: other code in the process is unaffected.
"""
from __future__ import annotations

from typing import Any

NETWORK_PROVIDERS = ("container-role", "iam-role")  # botocore's METHOD names of the two providers
MISSING_CREDENTIALS = ("no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the "
                       "environment (or AWS_PROFILE with ~/.aws/credentials)")


def boto3_session(*, use_instance_metadata: bool = False, **kwargs: Any):
    """A ``boto3.session.Session`` whose credential chain has no network providers unless asked for.

    Parameters
    ----------
    use_instance_metadata : bool
        True: keep botocore's full chain, including the container credentials endpoint and the
        EC2 instance metadata service (for a server that runs on EC2/ECS with a role).
    **kwargs
        Passed to ``boto3.session.Session`` (e.g. ``aws_access_key_id``, ``region_name``).
    """
    import boto3
    import botocore.session

    core = botocore.session.Session()
    if not use_instance_metadata:
        resolver = core.get_component("credential_provider")
        for name in NETWORK_PROVIDERS:
            resolver.remove(name)  # a no-op when botocore has no such provider
        if core.get_config_variable("defaults_mode") == "auto":  # "auto" asks the metadata service
            core.set_config_variable("defaults_mode", "standard")
    return boto3.session.Session(botocore_session=core, **kwargs)


def has_credentials(*, use_instance_metadata: bool = False) -> bool:
    """Whether the (restricted) chain finds credentials; without the network providers this reads
    only the environment and local files."""
    return boto3_session(use_instance_metadata=use_instance_metadata).get_credentials() is not None
