import pyarrow as pa

from backlog_source.core.schema import arrow_schema, kafka_schema


def test_columns_types_and_order_are_spark_kafka_sources():
    # org.apache.spark.sql.kafka010.KafkaRecordToRowConverter.kafkaSchema(includeHeaders)
    assert kafka_schema(False).simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int>"
    )
    assert kafka_schema(True).simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )


def test_arrow_schema_is_what_pyspark_checks_batches_against():
    schema = arrow_schema(True)
    assert schema.names == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    assert schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert schema.field("offset").type == pa.int64() and schema.field("partition").type == pa.int32()
    assert arrow_schema(False).names == schema.names[:-1]
