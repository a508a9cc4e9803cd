"""boto3 against S3 versioning on one node: the version cycle every backup and sync tool
relies on (overwrite, delete, restore, permanent delete), suspension and the null
version, paging, and the clean-up idiom of SDK-based tools on a versioned bucket."""

import boto3
import pytest
from botocore.exceptions import ClientError


def code(exc):
    return exc.value.response["Error"]["Code"]


def all_versions(s3, bucket, page=1000):
    versions, markers = [], []
    for p in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, PaginationConfig={"PageSize": page}):
        versions += p.get("Versions", [])
        markers += p.get("DeleteMarkers", [])
    return versions, markers


def test_boto3_versioning_cycle(s3, cairn_server, bucket):
    s3.put_object(Bucket=bucket, Key="doc", Body=b"v0")  # before versioning: the null version
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    ids = []
    for i in range(1, 4):
        r = s3.put_object(Bucket=bucket, Key="doc", Body=b"v%d" % i)
        assert r["VersionId"] not in ("", "null")
        ids.append(r["VersionId"])
    for i, vid in enumerate(ids, 1):
        g = s3.get_object(Bucket=bucket, Key="doc", VersionId=vid)
        assert g["Body"].read() == b"v%d" % i and g["VersionId"] == vid
    assert s3.get_object(Bucket=bucket, Key="doc", VersionId="null")["Body"].read() == b"v0"
    h = s3.head_object(Bucket=bucket, Key="doc", VersionId=ids[0])
    assert h["ContentLength"] == 2 and h["VersionId"] == ids[0]

    d = s3.delete_object(Bucket=bucket, Key="doc")
    assert d["DeleteMarker"] is True
    marker = d["VersionId"]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="doc")
    assert code(e) == "NoSuchKey"
    assert e.value.response["ResponseMetadata"]["HTTPHeaders"].get("x-amz-delete-marker") == "true"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="doc", VersionId=marker)
    assert code(e) == "MethodNotAllowed"
    versions, markers = all_versions(s3, bucket)
    assert [m["VersionId"] for m in markers] == [marker] and markers[0]["IsLatest"]
    assert sorted(v["VersionId"] for v in versions) == sorted(ids + ["null"])
    assert not any(v["IsLatest"] for v in versions)

    # Restore by removing the marker; then restore an old version by copying it.
    s3.delete_object(Bucket=bucket, Key="doc", VersionId=marker)
    assert s3.get_object(Bucket=bucket, Key="doc")["Body"].read() == b"v3"
    c = s3.copy_object(Bucket=bucket, Key="doc", CopySource={"Bucket": bucket, "Key": "doc", "VersionId": ids[0]})
    assert c["CopySourceVersionId"] == ids[0]
    assert s3.get_object(Bucket=bucket, Key="doc")["Body"].read() == b"v1"

    # Permanent delete of one version.
    s3.delete_object(Bucket=bucket, Key="doc", VersionId=ids[1])
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="doc", VersionId=ids[1])
    assert code(e) == "NoSuchVersion"

    # Suspended: the null version is replaced, the others stay.
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    # The write makes the null version; like S3 it answers no x-amz-version-id.
    assert "VersionId" not in s3.put_object(Bucket=bucket, Key="doc", Body=b"s")
    versions, _ = all_versions(s3, bucket)
    nulls = [v for v in versions if v["VersionId"] == "null"]
    assert len(nulls) == 1 and nulls[0]["IsLatest"] and nulls[0]["Size"] == 1

    # The clean-up idiom of SDK-based tools: delete every version and marker.
    res = boto3.session.Session().resource(
        "s3", endpoint_url=cairn_server.endpoint, region_name=cairn_server.region,
        aws_access_key_id=cairn_server.access_key, aws_secret_access_key=cairn_server.secret_key)
    res.Bucket(bucket).object_versions.delete()
    assert all_versions(s3, bucket) == ([], [])


def test_boto3_versions_paging_and_multi_delete(s3, bucket):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    want = set()
    for k in range(5):
        for v in range(k % 3 + 1):
            r = s3.put_object(Bucket=bucket, Key="dir%d/k%d" % (k % 2, k), Body=b"x" * v)
            want.add(("dir%d/k%d" % (k % 2, k), r["VersionId"]))
    for page in (1, 2, 3, 1000):
        versions, _ = all_versions(s3, bucket, page)
        assert {(v["Key"], v["VersionId"]) for v in versions} == want, page
        assert len(versions) == len(want)
    r = s3.list_object_versions(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["dir0/", "dir1/"]
    with pytest.raises(ClientError) as e:
        s3.list_object_versions(Bucket=bucket, KeyMarker="dir0/k0", VersionIdMarker="not-a-version")
    assert code(e) == "InvalidArgument"
    out = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k, "VersionId": v} for k, v in want]})
    assert len(out["Deleted"]) == len(want) and not out.get("Errors")
    assert all_versions(s3, bucket) == ([], [])


def test_boto3_object_lock(s3):
    """Object Lock through boto3: a bucket made with it, GOVERNANCE retention lifted by the
    bypass header, COMPLIANCE retention and legal holds refusing permanent deletes while
    delete markers go through, the lock headers on HEAD; the COMPLIANCE version goes once
    its date has passed."""
    import datetime
    import time
    import uuid

    name = "lock-" + uuid.uuid4().hex[:8]
    s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    assert s3.get_bucket_versioning(Bucket=name)["Status"] == "Enabled"
    cfg = s3.get_object_lock_configuration(Bucket=name)["ObjectLockConfiguration"]
    assert cfg["ObjectLockEnabled"] == "Enabled"
    with pytest.raises(ClientError) as e:
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Suspended"})
    assert code(e) == "InvalidBucketState"

    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=3)
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    gov = s3.put_object(Bucket=name, Key="gov", Body=b"g", ObjectLockMode="GOVERNANCE", ObjectLockRetainUntilDate=later)["VersionId"]
    comp = s3.put_object(Bucket=name, Key="comp", Body=b"c", ObjectLockMode="COMPLIANCE", ObjectLockRetainUntilDate=soon)["VersionId"]
    held = s3.put_object(Bucket=name, Key="held", Body=b"h", ObjectLockLegalHoldStatus="ON")["VersionId"]

    h = s3.head_object(Bucket=name, Key="comp")
    assert h["ObjectLockMode"] == "COMPLIANCE" and h["ObjectLockRetainUntilDate"] is not None
    assert s3.head_object(Bucket=name, Key="held")["ObjectLockLegalHoldStatus"] == "ON"

    for key, vid in (("gov", gov), ("comp", comp), ("held", held)):
        with pytest.raises(ClientError) as e:
            s3.delete_object(Bucket=name, Key=key, VersionId=vid)
        assert code(e) == "AccessDenied", key
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=name, Key="comp", VersionId=comp, BypassGovernanceRetention=True)
    assert code(e) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        s3.put_object_retention(Bucket=name, Key="comp", VersionId=comp,
                                Retention={"Mode": "GOVERNANCE", "RetainUntilDate": later}, BypassGovernanceRetention=True)
    assert code(e) == "AccessDenied"
    out = s3.delete_objects(Bucket=name, Delete={"Objects": [{"Key": "held", "VersionId": held}]})
    assert out["Errors"][0]["Code"] == "AccessDenied"

    # A delete marker removes nothing: allowed; the version stays.
    assert s3.delete_object(Bucket=name, Key="comp")["DeleteMarker"] is True
    assert s3.get_object(Bucket=name, Key="comp", VersionId=comp)["Body"].read() == b"c"

    s3.delete_object(Bucket=name, Key="gov", VersionId=gov, BypassGovernanceRetention=True)
    s3.put_object_legal_hold(Bucket=name, Key="held", VersionId=held, LegalHold={"Status": "OFF"})
    assert s3.get_object_legal_hold(Bucket=name, Key="held", VersionId=held)["LegalHold"]["Status"] == "OFF"
    s3.delete_object(Bucket=name, Key="held", VersionId=held)

    # The COMPLIANCE version goes once its date has passed.
    deadline = time.monotonic() + 30
    while True:
        try:
            s3.delete_object(Bucket=name, Key="comp", VersionId=comp)
            break
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "AccessDenied"
            assert time.monotonic() < deadline, "the COMPLIANCE retention never expired"
            time.sleep(0.2)
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=name):
        for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
            s3.delete_object(Bucket=name, Key=v["Key"], VersionId=v["VersionId"])
    s3.delete_bucket(Bucket=name)
