"""boto3 with users and keys made by `cairn admin` (issue 16): each user sees and uses only
its own buckets, a revoked key stops working (presigned URLs too), Object Ownership is
BucketOwnerEnforced."""

import json
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from botocore.exceptions import ClientError

from conftest import _find_binary, make_s3_client


def admin(server, *args):
    out = subprocess.run(
        [str(_find_binary()), "admin", "--admin", server.admin, "--data", str(server.data_dir), *args],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr + out.stdout
    return out.stdout


def code_of(excinfo):
    return excinfo.value.response.get("Error", {}).get("Code")


def wait_until(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return cond()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.fixture(scope="module")
def users(cairn_server):
    made = {}
    for name in ("pyalice", "pybob"):
        k = json.loads(admin(cairn_server, "--json", "user", "add", name))
        assert k["user"] == name and k["access_key"] and k["secret_key"]
        made[name] = make_s3_client(cairn_server, k["access_key"], k["secret_key"])
        made[name + "_key"] = k
    return made


def test_users_own_their_buckets(cairn_server, s3, users):
    alice, bob = users["pyalice"], users["pybob"]
    alice.create_bucket(Bucket="pyalice-b")
    bob.create_bucket(Bucket="pybob-b")
    alice.put_object(Bucket="pyalice-b", Key="k", Body=b"alice's")

    assert [b["Name"] for b in alice.list_buckets()["Buckets"]] == ["pyalice-b"]
    assert [b["Name"] for b in bob.list_buckets()["Buckets"]] == ["pybob-b"]
    root_sees = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert "pyalice-b" in root_sees and "pybob-b" in root_sees

    for call in (
        lambda: bob.get_object(Bucket="pyalice-b", Key="k"),
        lambda: bob.put_object(Bucket="pyalice-b", Key="x", Body=b"bob's"),
        lambda: bob.list_objects_v2(Bucket="pyalice-b"),
        lambda: bob.delete_objects(Bucket="pyalice-b", Delete={"Objects": [{"Key": "k"}]}),
        lambda: bob.copy_object(Bucket="pybob-b", Key="stolen", CopySource={"Bucket": "pyalice-b", "Key": "k"}),
    ):
        with pytest.raises(ClientError) as e:
            call()
        assert code_of(e) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        bob.create_bucket(Bucket="pyalice-b")
    assert code_of(e) == "BucketAlreadyExists"
    assert alice.get_object(Bucket="pyalice-b", Key="k")["Body"].read() == b"alice's"
    # The root user reads every bucket.
    assert s3.get_object(Bucket="pyalice-b", Key="k")["Body"].read() == b"alice's"

    oc = alice.get_bucket_ownership_controls(Bucket="pyalice-b")["OwnershipControls"]
    assert oc["Rules"] == [{"ObjectOwnership": "BucketOwnerEnforced"}]
    acl = alice.get_bucket_acl(Bucket="pyalice-b")
    assert acl["Owner"]["DisplayName"] == "pyalice"


def test_revoked_key_and_presigned_url(cairn_server, users):
    admin(cairn_server, "user", "add", "pycarol", "--no-key")
    k = json.loads(admin(cairn_server, "--json", "key", "create", "pycarol"))
    carol = make_s3_client(cairn_server, k["access_key"], k["secret_key"])
    wait_until(lambda: carol.create_bucket(Bucket="pycarol-b"))
    carol.put_object(Bucket="pycarol-b", Key="k", Body=b"carol's")
    url = carol.generate_presigned_url("get_object", Params={"Bucket": "pycarol-b", "Key": "k"}, ExpiresIn=3600)
    assert urllib.request.urlopen(url).read() == b"carol's"

    admin(cairn_server, "key", "revoke", k["access_key"])

    def refused():
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url)
        assert e.value.code == 403 and b"InvalidAccessKeyId" in e.value.read()
        with pytest.raises(ClientError) as e:
            carol.list_buckets()
        assert code_of(e) == "InvalidAccessKeyId"

    wait_until(refused)
    listed = admin(cairn_server, "key", "list", "pycarol")
    assert k["access_key"] not in listed and k["secret_key"] not in listed
