"""boto3 against S3 lifecycle configurations on one node: put, get and delete, the errors
boto3 users meet (no configuration, a bad rule, a transition), and the admin view of the
runner (`cairn admin lifecycle status|run`)."""

import json

import pytest
from botocore.exceptions import ClientError

from test_users import admin, wait_until


def code(exc):
    return exc.value.response["Error"]["Code"]


def test_boto3_lifecycle_configuration(s3, cairn_server, bucket):
    with pytest.raises(ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert code(e) == "NoSuchLifecycleConfiguration"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404

    rules = [
        {"ID": "logs", "Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 30}},
        {"Status": "Enabled", "Filter": {"And": {"Prefix": "tmp/", "Tags": [{"Key": "k", "Value": "v"}], "ObjectSizeGreaterThan": 10}},
         "Expiration": {"Date": "2031-01-01T00:00:00Z"}},
        {"ID": "versions", "Status": "Disabled", "Filter": {},
         "NoncurrentVersionExpiration": {"NoncurrentDays": 7, "NewerNoncurrentVersions": 2},
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 3}},
    ]
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": rules})
    got = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert [r.get("ID") for r in got][0] == "logs" and got[2]["ID"] == "versions"
    assert len(got[1]["ID"]) == 48  # generated, as S3 does
    assert got[0]["Expiration"]["Days"] == 30 and got[0]["Filter"]["Prefix"] == "logs/"
    assert got[1]["Filter"]["And"]["Tags"] == [{"Key": "k", "Value": "v"}]
    assert got[1]["Expiration"]["Date"].year == 2031
    assert got[2]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 7, "NewerNoncurrentVersions": 2}
    assert got[2]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 3}

    for bad, want in [
        ({"Status": "Enabled", "Filter": {}, "Expiration": {"Days": 0}}, "InvalidArgument"),
        ({"Status": "Enabled", "Filter": {}, "Expiration": {"Date": "2031-01-01T10:00:00Z"}}, "InvalidArgument"),
        # A Transition's (or NoncurrentVersionTransition's) StorageClass names an archive
        # tier; this server has none.
        ({"Status": "Enabled", "Filter": {}, "Transitions": [{"Days": 30, "StorageClass": "GLACIER"}]}, "InvalidStorageClass"),
        ({"Status": "Enabled", "Filter": {}, "NoncurrentVersionTransitions": [{"NoncurrentDays": 30, "StorageClass": "GLACIER"}]}, "InvalidStorageClass"),
        # More than one transition in a rule is not built.
        ({"Status": "Enabled", "Filter": {}, "NoncurrentVersionTransitions": [{"NoncurrentDays": 3, "StorageClass": "A"}, {"NoncurrentDays": 30, "StorageClass": "B"}]}, "NotImplemented"),
    ]:
        with pytest.raises(ClientError) as e:
            s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [bad]})
        assert code(e) == want, bad
    assert s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"] == got  # refusals changed nothing

    # The runner: a round on demand, visible in the admin view.
    admin(cairn_server, "lifecycle", "run")

    def finished():
        rows = [r for r in json.loads(admin(cairn_server, "--json", "lifecycle", "status")) if r["bucket"] == bucket]
        assert rows and rows[0].get("finished") and not rows[0]["running"], rows
        return rows[0]

    row = wait_until(finished, timeout=30)
    assert row["last"]["errors"] == 0
    assert bucket in admin(cairn_server, "lifecycle")

    s3.delete_bucket_lifecycle(Bucket=bucket)
    with pytest.raises(ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert code(e) == "NoSuchLifecycleConfiguration"
