"""boto3 against the S3 request edge cases and GetObjectAttributes (issue 15): what an SDK
sees when it creates a bucket it owns, streams a body without a length, sends metadata
that is not US-ASCII, or asks for an object's attributes."""

import base64
import zlib

import pytest
from botocore.exceptions import ClientError

KiB = 1 << 10


def error_of(excinfo):
    err = excinfo.value.response
    return err.get("Error", {}).get("Code"), err.get("ResponseMetadata", {}).get("HTTPStatusCode")


def test_create_owned_bucket_again_in_us_east_1(s3, bucket):
    # us-east-1 answers success and changes nothing.
    s3.put_object(Bucket=bucket, Key="k", Body=b"kept")
    r = s3.create_bucket(Bucket=bucket)
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"kept"
    with pytest.raises(ClientError) as e:
        s3.create_bucket(Bucket=bucket + "-x", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    assert error_of(e) == ("IllegalLocationConstraintException", 400)


def test_put_chunked_without_length(s3, bucket):
    # What the ceph s3-tests do: Transfer-Encoding: chunked and no Content-Length.
    def chunked(request, **kw):
        request.headers.add_header("Transfer-Encoding", "chunked")

    s3.meta.events.register_first("before-sign.s3.PutObject", chunked)
    try:
        r = s3.put_object(Bucket=bucket, Key="foo", Body=b"bar" * 1000)
    finally:
        s3.meta.events.unregister("before-sign.s3.PutObject", chunked)
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert s3.get_object(Bucket=bucket, Key="foo")["Body"].read() == b"bar" * 1000


def test_unicode_metadata_round_trip(s3, bucket):
    text = "élan ☃ 日本"
    encoded = "=?UTF-8?B?%s?=" % base64.b64encode(text.encode()).decode()
    s3.put_object(Bucket=bucket, Key="u", Body=b"x", Metadata={"name": encoded, "plain": "ascii"})
    got = s3.head_object(Bucket=bucket, Key="u")["Metadata"]
    assert got["plain"] == "ascii"
    assert got["name"].lower().startswith("=?utf-8?b?")
    word = got["name"][len("=?UTF-8?b?"):-2]
    assert base64.b64decode(word).decode() == text


def test_get_object_attributes(s3, bucket):
    body = b"attributes" * 100
    put = s3.put_object(Bucket=bucket, Key="plain", Body=body, ChecksumAlgorithm="CRC32")
    a = s3.get_object_attributes(Bucket=bucket, Key="plain", ObjectAttributes=["ETag", "Checksum", "ObjectSize", "StorageClass", "ObjectParts"])
    assert '"%s"' % a["ETag"] == put["ETag"]
    assert a["ObjectSize"] == len(body)
    assert a["StorageClass"] == "STANDARD"
    assert a["Checksum"]["ChecksumCRC32"] == base64.b64encode(zlib.crc32(body).to_bytes(4, "big")).decode()
    assert "ObjectParts" not in a

    mp = s3.create_multipart_upload(Bucket=bucket, Key="mp", ChecksumAlgorithm="CRC32")
    parts, sizes = [], [5 << 20, 5 << 20, 7]
    for i, n in enumerate(sizes, 1):
        up = s3.upload_part(Bucket=bucket, Key="mp", UploadId=mp["UploadId"], PartNumber=i, Body=bytes([i]) * n, ChecksumAlgorithm="CRC32")
        parts.append({"PartNumber": i, "ETag": up["ETag"], "ChecksumCRC32": up["ChecksumCRC32"]})
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=mp["UploadId"], MultipartUpload={"Parts": parts})
    seen, marker = [], 0
    while True:
        a = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=["ObjectParts"], MaxParts=2, PartNumberMarker=marker)
        op = a["ObjectParts"]
        assert op["TotalPartsCount"] == 3
        seen += op["Parts"]
        if not op["IsTruncated"]:
            break
        marker = op["NextPartNumberMarker"]
    assert [p["PartNumber"] for p in seen] == [1, 2, 3]
    assert [p["Size"] for p in seen] == sizes
    assert [p["ChecksumCRC32"] for p in seen] == [p["ChecksumCRC32"] for p in parts]
    # A part read returns that part's checksum.
    g = s3.get_object(Bucket=bucket, Key="mp", PartNumber=3, ChecksumMode="ENABLED")
    assert g["Body"].read() == bytes([3]) * 7
    assert g["ChecksumCRC32"] == parts[2]["ChecksumCRC32"]

    with pytest.raises(ClientError) as e:
        s3.get_object_attributes(Bucket=bucket, Key="missing", ObjectAttributes=["ETag"])
    assert error_of(e) == ("NoSuchKey", 404)
